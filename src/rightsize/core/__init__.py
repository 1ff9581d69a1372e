"""Plain data types, units and the cloud catalog. Importing this package never imports torch."""
