"""The migration scripts, oldest first; schema.sql is what they add up to."""
