"""Who is asked: approvers, on-call rotations and escalation."""
