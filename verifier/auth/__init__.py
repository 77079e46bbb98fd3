"""Bearer-JWT authentication (asymmetric keys only) and role policy."""
