"""Each lesson's check-yourself questions, one module per lesson of the registry, named by its stem."""
