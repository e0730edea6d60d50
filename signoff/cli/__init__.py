"""The command line: `signoff …` commands, the daemon's start-up, `signoff handle`."""
