{
  "targets": [
    {
      "target_name": "pgfence_relay",
      "sources": ["src/native/relay.c"],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    }
  ]
}
