"""Apps: ``AppFactory`` builds an ``App`` that answers questions with tools."""

from .app import App
from .factory import AppFactory

__all__ = ["AppFactory", "App"]
