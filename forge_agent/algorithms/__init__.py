"""The RL algorithm's pieces: advantages, policy losses, the replay buffer's staleness bound."""
