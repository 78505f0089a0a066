/*
 * The TLS side of the relay's I/O layer (src/native/stream-io.c) between two endpoints made
 * with pgfence's own TLS settings (tls-settings.c: a verifying client, a server with a
 * certificate), joined by a memory BIO pair. The input drives writes of its own bytes, reads
 * of arbitrary sizes, close_notify, bytes handed over before the reader took over, and garbage
 * injected into the record stream. Invariants: a read returns exactly the next bytes the peer
 * wrote (early bytes first); nothing fails or closes unless garbage was injected or the peer
 * said goodbye; and once both sides flush, every byte written arrives.
 */
#include <openssl/err.h>
#include <openssl/pem.h>
#include <string.h>

#include "fuzz-input.h"
#include "stream-io.h"
#include "tls-settings.h"

#define CAP 4096

static SSL_CTX *client_ctx, *server_ctx;

/* A PEM of a self-signed certificate for localhost and of its key, made once. */
static void make_contexts(void) {
  EVP_PKEY *key = EVP_EC_gen("P-256");
  X509 *cert = X509_new();
  X509_set_version(cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(cert), 1);
  X509_gmtime_adj(X509_getm_notBefore(cert), -60);
  X509_gmtime_adj(X509_getm_notAfter(cert), 86400);
  X509_set_pubkey(cert, key);
  X509_NAME *name = X509_get_subject_name(cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC, (const unsigned char *)"localhost", -1, -1,
                             0);
  X509_set_issuer_name(cert, name);
  X509_sign(cert, key, EVP_sha256());
  BIO *cert_pem = BIO_new(BIO_s_mem()), *key_pem = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(cert_pem, cert);
  PEM_write_bio_PrivateKey(key_pem, key, NULL, NULL, 0, NULL, NULL);
  char *cert_data, *key_data;
  long cert_len = BIO_get_mem_data(cert_pem, &cert_data);
  long key_len = BIO_get_mem_data(key_pem, &key_data);
  server_ctx = tls_new_context(1, 0);
  client_ctx = tls_new_context(0, 1);
  REQUIRE(tls_use_identity_pem(server_ctx, cert_data, (size_t)cert_len, key_data,
                               (size_t)key_len) == 0);
  REQUIRE(tls_trust_pem(client_ctx, cert_data, (size_t)cert_len) == 0);
  REQUIRE(tls_trust_pem(client_ctx, key_data, (size_t)key_len) < 0); /* a key is no CA */
  BIO_free(cert_pem);
  BIO_free(key_pem);
  X509_free(cert);
  EVP_PKEY_free(key);
}

typedef struct {
  stream_io_t io;
  bytes_t out;    /* written, not yet taken by the TLS layer */
  bytes_t expect; /* what this end must read, in order */
  size_t got;
  int said_goodbye, heard_goodbye, corrupted, failed;
} end_t;

static void flush(end_t *e) {
  if (e->out.len == 0 || e->failed) return;
  const char *detail = NULL;
  ssize_t n = stream_write(&e->io, e->out.data, e->out.len, &detail);
  REQUIRE(n >= 0 || e->corrupted);
  if (n < 0) {
    e->failed = 1;
    return;
  }
  memmove(e->out.data, e->out.data + n, e->out.len - (size_t)n);
  e->out.len -= (size_t)n;
}

static void write_bytes(end_t *e, end_t *peer, const uint8_t *p, size_t n) {
  if (e->said_goodbye || e->heard_goodbye || e->failed) return;
  REQUIRE(bytes_append(&e->out, p, n) == 0 && bytes_append(&peer->expect, p, n) == 0);
  flush(e);
}

/* Reads once; returns whether bytes came. */
static int read_some(end_t *e, end_t *peer, size_t cap) {
  static uint8_t buf[CAP];
  if (e->heard_goodbye || e->failed) return 0;
  const char *detail = NULL;
  ssize_t n = stream_read(&e->io, buf, cap, &detail);
  if (n > 0) {
    REQUIRE((size_t)n <= cap);
    if (!e->corrupted) {
      REQUIRE(e->got + (size_t)n <= e->expect.len);
      REQUIRE(memcmp(e->expect.data + e->got, buf, (size_t)n) == 0);
    }
    e->got += (size_t)n;
    return 1;
  }
  if (n == STREAM_CLOSED) {
    REQUIRE(peer->said_goodbye || e->corrupted);
    REQUIRE(e->corrupted || e->got == e->expect.len);
    e->heard_goodbye = 1;
  } else if (n == STREAM_FAILED) {
    REQUIRE(e->corrupted && detail != NULL);
    e->failed = 1;
  }
  return 0;
}

static int handshake(SSL *client, SSL *server) {
  for (int i = 0; i < 16; i++) {
    int c = SSL_do_handshake(client), s = SSL_do_handshake(server);
    if (c == 1 && s == 1) return 1;
  }
  return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!client_ctx) make_contexts();
  input_t in = {data, size};
  SSL *client = SSL_new(client_ctx), *server = SSL_new(server_ctx);
  REQUIRE(tls_configure_peer_name(client, "localhost") == 0);
  BIO *client_bio, *server_bio;
  REQUIRE(BIO_new_bio_pair(&client_bio, 0, &server_bio, 0) == 1);
  SSL_set_bio(client, client_bio, client_bio);
  SSL_set_bio(server, server_bio, server_bio);
  SSL_set_connect_state(client);
  SSL_set_accept_state(server);
  REQUIRE(handshake(client, server));
  end_t ends[2] = {{.io = {.fd = -1, .ssl = client}}, {.io = {.fd = -1, .ssl = server}}};
  /* Bytes the server end received before it took over (the pump's, in the relay). */
  size_t early = take_byte(&in) % 32;
  early = early < in.len ? early : in.len;
  REQUIRE(bytes_append(&ends[1].io.early, in.data, early) == 0);
  REQUIRE(bytes_append(&ends[1].expect, in.data, early) == 0);
  in.data += early, in.len -= early;
  while (in.len > 0) {
    uint8_t op = take_byte(&in);
    end_t *e = &ends[op & 1], *peer = &ends[!(op & 1)];
    size_t n = (size_t)take_byte(&in) * 16 + 1;
    switch ((op >> 1) % 5) {
      case 0:
        n = n < in.len ? n : in.len;
        write_bytes(e, peer, in.data, n);
        in.data += n, in.len -= n;
        break;
      case 1:
      case 2:
        read_some(e, peer, n < CAP ? n : CAP);
        break;
      case 3: /* garbage in the records this end reads */
        n = n % 64 < in.len ? n % 64 : in.len;
        if (n > 0 && BIO_write(op & 1 ? client_bio : server_bio, in.data, (int)n) > 0)
          e->corrupted = 1;
        in.data += n, in.len -= n;
        break;
      default:
        if (!e->said_goodbye && !e->failed && e->out.len == 0) {
          stream_close_notify(&e->io);
          e->said_goodbye = 1;
        }
    }
    if (e->corrupted) peer->corrupted = 1; /* a failed end may answer with an alert */
  }
  /* Everything written arrives once both sides flush and read. */
  for (int progress = 1; progress;) {
    flush(&ends[0]);
    flush(&ends[1]);
    progress = read_some(&ends[0], &ends[1], CAP) | read_some(&ends[1], &ends[0], CAP);
  }
  for (int i = 0; i < 2; i++) {
    REQUIRE(ends[i].corrupted || ends[i].got == ends[i].expect.len);
    REQUIRE(!stream_pending(&ends[i].io) || ends[i].corrupted || ends[i].heard_goodbye);
    bytes_free(&ends[i].out);
    bytes_free(&ends[i].expect);
    stream_io_free(&ends[i].io);
  }
  SSL_free(client);
  SSL_free(server);
  ERR_clear_error();
  return 0;
}
