{
  "targets": [
    {
      "target_name": "pgfence_relay",
      "sources": [
        "src/native/relay.c",
        "src/native/framing.c",
        "src/native/query-cache.c",
        "src/native/query-normalise.c",
        "src/native/release-memory.c",
        "src/native/session-progress.c",
        "src/native/tcp-keepalive.c",
        "src/native/stream-io.c",
        "src/native/tls-channel.c",
        "src/native/tls-context.c",
        "src/native/tls-settings.c",
        "src/native/scram-server.c",
        "src/native/random-block.c",
        "src/native/client-login.c",
        "src/native/client-accept.c",
        "src/native/login-memory.c",
        "src/native/startup-user.c",
        "src/native/server-link.c",
        "src/native/link-shelf.c",
        "src/native/login-lend.c",
        "src/native/relay-side.c",
        "src/native/poll-park.c",
        "src/native/reset-answer.c"
      ],
      "cflags": ["-O2", "-Wall", "-Wextra", "-Wno-unused-parameter"]
    }
  ]
}
