# test_shim runs its programs with build/libdmutex.so preloaded: `make
# test-build` must build the shim itself too, not only libdmcore.a.
test-build: $(B)/libdmutex.so
