"""Everything one GPU vendor knows, one package per vendor (`nvidia`, `amd`)."""
