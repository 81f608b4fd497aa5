"""Guests: images built from Debian packages, and the host side of their control channel."""
