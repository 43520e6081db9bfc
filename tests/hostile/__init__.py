"""Generators of hostile input (workspaces, actions, corpora, model files, spans) for the attack-surface tests."""
