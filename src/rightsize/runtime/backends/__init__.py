"""Backends place a job's nodes somewhere: ``local`` runs each as a process in its own cgroup."""
