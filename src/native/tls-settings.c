#include "tls-settings.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

/* Which contexts are a server's: ex_data index, made once. */
static int server_index = -1;

SSL_CTX *tls_new_context(int server, int verify) {
  if (server_index < 0) server_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
  SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) return NULL;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  /* Writes go out record by record from a buffer that may move between retries. */
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  /* Fewer reads: records are taken from the socket in bulk (stream_pending() tells). */
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_verify(ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
  if (server) {
    /* As PostgreSQL's own server: no resumption, so no session tickets to make and send after
     * each handshake (TLS 1.3 sends two by default), and no session cache. */
    SSL_CTX_set_options(ctx, SSL_OP_NO_TICKET);
    SSL_CTX_set_num_tickets(ctx, 0);
    SSL_CTX_set_session_cache_mode(ctx, SSL_SESS_CACHE_OFF);
  }
  SSL_CTX_set_ex_data(ctx, server_index, server ? ctx : NULL);
  return ctx;
}

int tls_context_is_server(SSL_CTX *ctx) { return SSL_CTX_get_ex_data(ctx, server_index) != NULL; }

static int is_ip(const char *host) {
  unsigned char addr[16];
  return inet_pton(AF_INET, host, addr) == 1 || inet_pton(AF_INET6, host, addr) == 1;
}

int tls_configure_peer_name(SSL *ssl, const char *host) {
  int ip = is_ip(host);
  if (!ip && SSL_set_tlsext_host_name(ssl, host) != 1) return -1;
  if (SSL_get_verify_mode(ssl) == SSL_VERIFY_NONE) return 0;
  X509_VERIFY_PARAM *param = SSL_get0_param(ssl);
  return (ip ? X509_VERIFY_PARAM_set1_ip_asc(param, host) : SSL_set1_host(ssl, host)) == 1 ? 0 : -1;
}

int tls_trust_pem(SSL_CTX *ctx, const void *pem, size_t len) {
  BIO *bio = BIO_new_mem_buf(pem, (int)len);
  X509_STORE *store = SSL_CTX_get_cert_store(ctx);
  int count = 0, ok = bio != NULL;
  X509 *cert;
  while (ok && (cert = PEM_read_bio_X509(bio, NULL, NULL, NULL)) != NULL) {
    ok = X509_STORE_add_cert(store, cert);
    X509_free(cert);
    count++;
  }
  ERR_clear_error(); /* the end of the bundle */
  BIO_free(bio);
  return ok && count > 0 ? 0 : -1;
}

/* The certificate, then its chain. */
static int use_chain(SSL_CTX *ctx, BIO *pem) {
  X509 *cert = PEM_read_bio_X509(pem, NULL, NULL, NULL);
  int ok = cert && SSL_CTX_use_certificate(ctx, cert) == 1;
  X509_free(cert);
  X509 *extra;
  while (ok && (extra = PEM_read_bio_X509(pem, NULL, NULL, NULL)) != NULL)
    if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) X509_free(extra), ok = 0;
  ERR_clear_error();
  return ok;
}

int tls_use_identity_pem(SSL_CTX *ctx, const void *cert, size_t cert_len, const void *key,
                         size_t key_len) {
  BIO *cert_bio = BIO_new_mem_buf(cert, (int)cert_len);
  BIO *key_bio = BIO_new_mem_buf(key, (int)key_len);
  int ok = cert_bio && key_bio && use_chain(ctx, cert_bio);
  EVP_PKEY *pkey = ok ? PEM_read_bio_PrivateKey(key_bio, NULL, NULL, NULL) : NULL;
  ok = pkey && SSL_CTX_use_PrivateKey(ctx, pkey) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(pkey);
  BIO_free(cert_bio);
  BIO_free(key_bio);
  return ok ? 0 : -1;
}
