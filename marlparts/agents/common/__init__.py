"""The machinery every algorithm shares: groups of agents, trained-model records, optimizer steps,
checkpoints, tracking and masked means.
"""
