pytest_plugins = ["tests.fixtures.s3"]
