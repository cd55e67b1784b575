/* libdlleaf.so: what libdlctor.so's constructor loads. */
int dlleaf_value(void) { return 1; }
