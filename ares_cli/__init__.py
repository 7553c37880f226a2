"""ares: difficulty-adaptive reasoning RL (ARES / AEPO, PAEC and RLVR baselines) from the command line."""

__version__ = "0.1.0"
