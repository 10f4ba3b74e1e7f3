"""The local backend: every task a supervised process on this machine."""
