"""Generators of hostile input (workspaces, corpora, model files, actions) for the attack-surface tests."""
