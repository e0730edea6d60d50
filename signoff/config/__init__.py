"""Settings: the TOML file, its sections, ${ENV} substitution, and the checks that
`config check` and `daemon start` share."""
