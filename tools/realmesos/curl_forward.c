/* libcurl.so.4 for libmesos: it was linked against a libcurl whose symbols carry the version
 * tag CURL_OPENSSL_3, while today's distributions tag them CURL_OPENSSL_4 (or
 * CURL_GNUTLS_3). This library answers the seven calls libmesos makes under the old tag and
 * forwards each one to the system's libcurl, opened by its full path (REAL_CURL, given
 * at build time) so that its own soname does not resolve to this file again. */
#include <dlfcn.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#ifndef REAL_CURL
#error "REAL_CURL must name the system libcurl"
#endif

static void *real(const char *name)
{
    static void *handle;
    if (handle == NULL) {
        handle = dlopen(REAL_CURL, RTLD_NOW | RTLD_LOCAL);
        if (handle == NULL) {
            fprintf(stderr, "realmesos: cannot open %s: %s\n", REAL_CURL, dlerror());
            abort();
        }
    }
    void *symbol = dlsym(handle, name);
    if (symbol == NULL) {
        fprintf(stderr, "realmesos: %s has no %s\n", REAL_CURL, name);
        abort();
    }
    return symbol;
}

int curl_global_init(long flags)
{
    return ((int (*)(long))real("curl_global_init"))(flags);
}

void *curl_easy_init(void)
{
    return ((void *(*)(void))real("curl_easy_init"))();
}

/* Both variadic calls take exactly one more argument: a long, a pointer or a curl_off_t,
 * each passed in one 64-bit register on x86_64. */
int curl_easy_setopt(void *curl, int option, ...)
{
    va_list args;
    va_start(args, option);
    void *value = va_arg(args, void *);
    va_end(args);
    return ((int (*)(void *, int, void *))real("curl_easy_setopt"))(curl, option, value);
}

int curl_easy_getinfo(void *curl, int info, ...)
{
    va_list args;
    va_start(args, info);
    void *value = va_arg(args, void *);
    va_end(args);
    return ((int (*)(void *, int, void *))real("curl_easy_getinfo"))(curl, info, value);
}

int curl_easy_perform(void *curl)
{
    return ((int (*)(void *))real("curl_easy_perform"))(curl);
}

const char *curl_easy_strerror(int code)
{
    return ((const char *(*)(int))real("curl_easy_strerror"))(code);
}

void curl_easy_cleanup(void *curl)
{
    ((void (*)(void *))real("curl_easy_cleanup"))(curl);
}
