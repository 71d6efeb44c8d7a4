/* The harness behind proxy_check_noproxy.tsv: curl's own NO_PROXY matching,
   its source saved unchanged as body.c beside this file and compiled with the
   few libcurl internals it calls. From a curl checkout (tag curl-X_Y_Z):
     8.21.0: git show curl-8_21_0:lib/proxy.c   | sed -n 47,274p > body.c
     8.18.0: git show curl-8_18_0:lib/noproxy.c | sed -n 40,259p > body.c
     8.17.0: git show curl-8_17_0:lib/noproxy.c | sed -n 42,262p > body.c
     8.9.0:  git show curl-8_9_0:lib/noproxy.c  | sed -n 41,262p > body.c
     8.8.0:  git show curl-8_8_0:lib/noproxy.c  | sed -n 41,263p > body.c
     7.87.0: git show curl-7_87_0:lib/noproxy.c | sed -n 41,253p > body.c
     7.86.0: git show curl-7_86_0:lib/noproxy.c | sed -n 37,220p > body.c
     gcc -o h [-DCHECK=Curl_check_noproxy] [-DCHECK_SPACESEP] harness.c
   (Curl_check_noproxy up to 8.18.0; 8.8.0's takes a third argument)
     ./h < pairs   (pairs: host TAB no_proxy, \t for a tab)
   prints host TAB no_proxy TAB 1 when the proxy is bypassed, else 0. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <stdbool.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#define TRUE true
#define FALSE false
#define UNITTEST
#ifdef CHECK_SPACESEP /* 8.8.0 reports blank-separated lists */
static bool spacesep;
#define SPACESEP , &spacesep
#else
#define SPACESEP
#endif
#ifndef CHECK
#define CHECK proxy_check_noproxy
#endif
#define USE_IPV6 1
#define ISBLANK(x) ((x) == ' ' || (x) == '\t')
typedef long long curl_off_t;
#define curlx_inet_pton inet_pton
#define Curl_inet_pton inet_pton
#define strncasecompare(a, b, n) (strncasecmp((a), (b), (n)) == 0)
#define curl_strnequal(a, b, n) (strncasecmp((a), (b), (n)) == 0)
static void curlx_str_passblanks(const char **p) { while(ISBLANK(**p)) (*p)++; }
/* curlx_str_number: decimal digits, at least one, value <= max; 0 on success */
static int curlx_str_number(const char **p, curl_off_t *nump, curl_off_t max) {
  curl_off_t n = 0; const char *s = *p;
  if(*s < '0' || *s > '9') return 1;
  while(*s >= '0' && *s <= '9') { n = n * 10 + (*s - '0'); if(n > max) return 1; s++; }
  *p = s; *nump = n; return 0;
}
#include "body.c"

int main(void) {
  char line[8192];
  while(fgets(line, sizeof line, stdin)) {
    line[strcspn(line, "\n")] = 0;
    char *tab = strchr(line, '\t');
    if(!tab) continue;
    *tab = 0;
    char np[8192]; size_t j = 0;
    for(char *s = tab + 1; *s; s++) {
      if(s[0] == '\\' && s[1] == 't') { np[j++] = '\t'; s++; } else np[j++] = *s;
    }
    np[j] = 0;
    printf("%s\t%s\t%d\n", line, tab + 1, CHECK(line, np SPACESEP) ? 1 : 0);
  }
  return 0;
}
