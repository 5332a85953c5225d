"""Payment saga domain: orders, claims, payments and the errors the state machine matches.

Nothing in this package reads ``os.environ`` or knows an event's shape; handlers do that.
"""

from __future__ import annotations
