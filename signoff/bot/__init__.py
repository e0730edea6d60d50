"""The approval conversation, platform-neutral."""
