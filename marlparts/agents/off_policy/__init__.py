"""The off-policy family: the shared base (replay per group, target models, batch sampling), MADDPG,
MATD3, MASAC, QMIX and VDN.
"""
