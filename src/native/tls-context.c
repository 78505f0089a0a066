#define NAPI_VERSION 8
#include "tls-context.h"

#include <arpa/inet.h>
#include <stdio.h>
#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509v3.h>

/* Which contexts are a server's: ex_data index, made once. */
static int server_index = -1;

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

static int buffer_of(napi_env env, napi_value object, const char *name, BIO **bio) {
  napi_value value;
  bool is_buffer = false;
  void *data;
  size_t len;
  *bio = NULL;
  if (napi_get_named_property(env, object, name, &value) != napi_ok ||
      napi_is_buffer(env, value, &is_buffer) != napi_ok || !is_buffer)
    return 0;
  napi_get_buffer_info(env, value, &data, &len);
  *bio = BIO_new_mem_buf(data, (int)len);
  return *bio ? 1 : -1;
}

/* Every certificate of a PEM bundle as trusted. */
static int load_ca(SSL_CTX *ctx, BIO *pem) {
  X509_STORE *store = SSL_CTX_get_cert_store(ctx);
  int count = 0;
  X509 *cert;
  while ((cert = PEM_read_bio_X509(pem, NULL, NULL, NULL)) != NULL) {
    int ok = X509_STORE_add_cert(store, cert);
    X509_free(cert);
    if (!ok) return -1;
    count++;
  }
  ERR_clear_error(); /* the end of the bundle */
  return count > 0 ? 0 : -1;
}

/* The certificate, then its chain, then the key. */
static int load_identity(SSL_CTX *ctx, BIO *cert_pem, BIO *key_pem) {
  X509 *cert = PEM_read_bio_X509(cert_pem, NULL, NULL, NULL);
  int ok = cert && SSL_CTX_use_certificate(ctx, cert) == 1;
  X509_free(cert);
  X509 *extra;
  while (ok && (extra = PEM_read_bio_X509(cert_pem, NULL, NULL, NULL)) != NULL)
    if (SSL_CTX_add0_chain_cert(ctx, extra) != 1) X509_free(extra), ok = 0;
  ERR_clear_error();
  EVP_PKEY *key = ok ? PEM_read_bio_PrivateKey(key_pem, NULL, NULL, NULL) : NULL;
  ok = key && SSL_CTX_use_PrivateKey(ctx, key) == 1 && SSL_CTX_check_private_key(ctx) == 1;
  EVP_PKEY_free(key);
  return ok ? 0 : -1;
}

static void context_finalize(napi_env env, void *data, void *hint) { SSL_CTX_free(data); }

static SSL_CTX *new_context(int server, int verify) {
  if (server_index < 0) server_index = SSL_CTX_get_ex_new_index(0, NULL, NULL, NULL, NULL);
  SSL_CTX *ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
  if (!ctx) return NULL;
  SSL_CTX_set_min_proto_version(ctx, TLS1_2_VERSION);
  SSL_CTX_set_options(ctx, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_COMPRESSION);
  SSL_CTX_set_mode(ctx, SSL_MODE_ENABLE_PARTIAL_WRITE | SSL_MODE_ACCEPT_MOVING_WRITE_BUFFER);
  SSL_CTX_set_read_ahead(ctx, 1);
  SSL_CTX_set_verify(ctx, verify ? SSL_VERIFY_PEER : SSL_VERIFY_NONE, NULL);
  SSL_CTX_set_ex_data(ctx, server_index, server ? ctx : NULL);
  return ctx;
}

static int flag_of(napi_env env, napi_value object, const char *name) {
  napi_value value;
  bool flag = false;
  napi_get_named_property(env, object, name, &value);
  napi_get_value_bool(env, value, &flag);
  return flag;
}

napi_value js_tls_context(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1], wrapper;
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  int server = flag_of(env, argv[0], "server"), verify = flag_of(env, argv[0], "verify");
  SSL_CTX *ctx = new_context(server, verify);
  BIO *ca = NULL, *cert = NULL, *key = NULL;
  int ok = ctx && buffer_of(env, argv[0], "ca", &ca) >= 0 &&
           buffer_of(env, argv[0], "cert", &cert) >= 0 && buffer_of(env, argv[0], "key", &key) >= 0;
  if (ok && ca) ok = load_ca(ctx, ca) == 0;
  else if (ok && verify) ok = SSL_CTX_set_default_verify_paths(ctx) == 1;
  if (ok && server) ok = cert && key && load_identity(ctx, cert, key) == 0;
  BIO_free(ca);
  BIO_free(cert);
  BIO_free(key);
  if (!ok) {
    const char *reason = ERR_reason_error_string(ERR_get_error());
    ERR_clear_error();
    SSL_CTX_free(ctx);
    char message[256];
    snprintf(message, sizeof message, "pgfence tls: cannot use the TLS settings: %s",
             reason ? reason : "missing certificate or key");
    napi_throw_error(env, NULL, message);
    return NULL;
  }
  napi_create_object(env, &wrapper);
  napi_wrap(env, wrapper, ctx, context_finalize, NULL, NULL);
  return wrapper;
}

SSL_CTX *tls_context_of(napi_env env, napi_value value) {
  SSL_CTX *ctx = NULL;
  return napi_unwrap(env, value, (void **)&ctx) == napi_ok ? ctx : NULL;
}
