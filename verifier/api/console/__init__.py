"""The web console at /console and the offline API docs at /docs and /redoc (api layer).

Plain HTML/JS/CSS shipped as package data: no CDN, no build step. The console only calls the public API
with the bearer token the user gives it; it has no privileges of its own.
"""
