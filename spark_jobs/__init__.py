"""PySpark jobs that audit replica consistency, and the Spark data source over segment files."""
