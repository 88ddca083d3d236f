"""The examples/ folder, each example run against the local stack and synthesized where it has a stack."""
