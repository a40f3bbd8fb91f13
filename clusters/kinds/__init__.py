"""The cluster kinds: each one module that declares what it is (clusters/kinds/base.py), and one
line in clusters/registry.py."""
