"""Tool environments: specs and importers, executable domains, verifiers, sandboxes."""
