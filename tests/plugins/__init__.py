"""Plug-in packages used by the tests, as a third party would write them, and their
installer (`install.install_plugin`)."""
