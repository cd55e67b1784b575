# The demo: build/stock, an ordinary pthread program that oversells across
# machines, and `make demo`, which runs it on simulated machines without and
# then with the shim, then with the shim in each mode (default, fair, cache)
# for a table of sales per second (demo/run.sh; options via
# DEMO_ARGS="-m 3 -t 8 -n 2000", DEMO_ARGS=-q skips the table;
# DEMO_REDIS=sentinel runs demo/sentinel.sh instead, DEMO_BACKEND=etcd
# demo/etcd.sh).

all: $(B)/stock

# A plain program: no shim headers or objects, dynamically linked (so the
# shim can be preloaded) and with stock_lock in its symbol table.
$(B)/stock: demo/stock.c
	@mkdir -p $(B)
	$(CC) -std=gnu11 $(DM_WARN) -pthread $(CFLAGS) $(shell pkg-config --cflags hiredis) \
	    $< -o $@ $(shell pkg-config --libs hiredis)

# DEMO_REDIS=sentinel: the sale with the lock behind Redis Sentinel, its
# primary SIGKILLed mid-sale (demo/sentinel.sh). DEMO_BACKEND=etcd: the
# lock in a 3-member etcd cluster, its leader SIGKILLed mid-sale
# (demo/etcd.sh).
DEMO_REDIS ?=
DEMO_BACKEND ?=

demo:
	@tools/deps.sh
	@$(MAKE) --no-print-directory -s all
	@if [ "$(DEMO_BACKEND)" = etcd ]; then demo/etcd.sh $(DEMO_ARGS); \
	 elif [ -n "$(DEMO_BACKEND)" ] && [ "$(DEMO_BACKEND)" != redis ]; then \
	    echo "demo: DEMO_BACKEND=$(DEMO_BACKEND): redis (the default) or etcd" >&2; exit 2; \
	 elif [ "$(DEMO_REDIS)" = sentinel ]; then demo/sentinel.sh $(DEMO_ARGS); \
	 elif [ -n "$(DEMO_REDIS)" ]; then echo "demo: DEMO_REDIS=$(DEMO_REDIS): only sentinel" >&2; exit 2; \
	 else demo/run.sh $(DEMO_ARGS); fi
