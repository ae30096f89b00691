"""The console: server-rendered pages of what Vigil knows, for whoever's token may see it.

    pages     the routes (/console/...) and what each renders
    session   the viewer's token (auth proxy header or login cookie), CSRF, security headers
    access    the SubjectAccessReviews each page asks
    fields    every query parameter and form field, bounded
    views     objects as the rows the pages show (pure)
    dag       a workflow's DAG laid out for SVG (pure)
    sources   what the console reads and writes through, as protocols the runtime fills

templates/ are Jinja (autoescaped); static/ holds the one stylesheet and htmx (vendored:
static/VENDORED.md says which version, from where, under which licence). docs/console.md
describes it for users.
"""

from vigil.api.console.pages import Console
from vigil.api.console.sources import ConsoleReads, ConsoleSources, ConsoleWrites, Refused

__all__ = ["Console", "ConsoleReads", "ConsoleSources", "ConsoleWrites", "Refused"]
