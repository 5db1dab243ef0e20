"""The thin reconciler: scales ModelDeployments toward a generated-tokens-per-second target."""
