"""Sample recordings shipped with the package (read them with `adapters.swe_agent.sample_path`)."""
