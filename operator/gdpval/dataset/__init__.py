"""Loading GDPval tasks (ModelScope, a local folder, or an s3:// prefix) and choosing samples."""
