"""Reading JSONL back: records, runs, phases, and the text, JSON, PNG and HTML
renderers."""
