"""Hostile workspaces and actions for the gate, run in a child process under a memory limit."""
