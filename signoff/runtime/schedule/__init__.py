"""Schedules: cron and interval triggers, durations, the scheduler."""
