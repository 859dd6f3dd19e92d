"""`python -m apps.export`: a checkpoint's policy as a folder other tools load."""
