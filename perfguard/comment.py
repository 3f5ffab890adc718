"""What a perfguard pull-request comment is, shared by the report that writes it and the
client that posts it (neither imports the other)."""

MARKER = "<!-- perfguard-report -->"
"""The report's first line: how the client finds perfguard's comment among the others."""

COMMENT_LIMIT = 65_536
"""GitHub's limit on a comment's body, in characters: the report is trimmed to it."""
