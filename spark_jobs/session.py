"""The SparkSession the audit runs in: local[2] by default, any master by flag, quiet, with the data source.

Local mode needs only Java and pyspark. On a real cluster (`--master
spark://host:7077`, `yarn`, ...) the executors must have kraftpy importable
and see the cluster directory at the same path (a shared file system): the
data source reads the files where the tasks run.
"""

from __future__ import annotations

import os
import sys

from pyspark.sql import SparkSession

from kraftpy.spark_jobs.datasource import KraftpyLogDataSource

DEFAULT_MASTER = "local[2]"
# The audit's shuffles are small (a few rows per offset); Spark's 200 default would be 200 tiny tasks each.
SHUFFLE_PARTITIONS = 2
# The audit's JVM lives for seconds: C1-only compilation and the serial collector start it faster, which is
# most of an audit's time on a small machine.
DRIVER_JAVA_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
LOOPBACK = "127.0.0.1"
DEFAULTS = {
    "spark.ui.enabled": "false",
    "spark.ui.showConsoleProgress": "false",
    "spark.sql.shuffle.partitions": str(SHUFFLE_PARTITIONS),
    "spark.driver.extraJavaOptions": DRIVER_JAVA_OPTIONS,
}


def bind_conf(master: str, driver_host: str | None) -> dict[str, str]:
    """Where the driver listens: loopback for a local master (nothing outside needs to reach it), the
    given host for a real master (its executors connect back to the driver), else Spark's own choice."""
    host = driver_host if driver_host is not None else (LOOPBACK if master.startswith("local") else None)
    if host is None:
        return {}
    return {"spark.driver.host": host, "spark.driver.bindAddress": host}


def make_session(
    master: str = DEFAULT_MASTER,
    app_name: str = "kraftpy-audit",
    conf: dict[str, str] | None = None,
    driver_host: str | None = None,
) -> SparkSession:
    """A session with the kraftpy-log data source registered; the UI and progress bars off; the driver
    bound to loopback for a local master (`bind_conf`); `conf` on top."""
    # Python workers run the interpreter that runs us, so they import the same kraftpy.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder.master(master).appName(app_name)
    if master.startswith("local") and driver_host is None:
        os.environ.setdefault("SPARK_LOCAL_IP", LOOPBACK)  # the block manager and RPC bind here too
    for key, value in {**DEFAULTS, **bind_conf(master, driver_host), **(conf or {})}.items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(KraftpyLogDataSource)
    return spark
