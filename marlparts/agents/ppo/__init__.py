"""The PPO family: the shared core (rollouts, GAE, epochs of minibatches), MAPPO, IPPO and their
recurrent forms.
"""
