"""Policy: ALLOW / ASK_USER / BLOCK, grants and the rules of unattended runs."""
