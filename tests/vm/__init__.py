"""Throwaway Debian VMs for the platform matrix (README.md here)."""
