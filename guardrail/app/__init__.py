"""The assembly above the five layers: `Guard.default`, the command table, the report and the audit command."""
