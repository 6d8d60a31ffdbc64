"""Core: the GPU identity model, device-ID forms, the GPU → owner mapping and the refresher that keeps it fresh."""
