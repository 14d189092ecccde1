"""Turning traces into files, tables, leaderboards and reports."""
