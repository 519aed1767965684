"""Model runtimes behind one narrow interface (`base.Engine`); the rest of the server never
imports SGLang."""
