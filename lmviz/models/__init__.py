"""Which model a name means and how it is loaded: the bundled file, the shipped tiny models, the hub
(with its size cap), the offline cache that `lmviz prepare` fills, and the deployment's settings."""
