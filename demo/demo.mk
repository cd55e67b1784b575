# The demo: build/stock, an ordinary pthread program that oversells across
# machines, and `make demo`, which runs it on simulated machines without and
# then with the shim, then with the shim in each mode (default, fair, cache)
# for a table of sales per second (demo/run.sh; options via
# DEMO_ARGS="-m 3 -t 8 -n 2000", DEMO_ARGS=-q skips the table;
# DEMO_REDIS=sentinel runs demo/sentinel.sh instead).

all: $(B)/stock

# A plain program: no shim headers or objects, dynamically linked (so the
# shim can be preloaded) and with stock_lock in its symbol table.
$(B)/stock: demo/stock.c
	@mkdir -p $(B)
	$(CC) -std=gnu11 $(DM_WARN) -pthread $(CFLAGS) $(shell pkg-config --cflags hiredis) \
	    $< -o $@ $(shell pkg-config --libs hiredis)

# DEMO_REDIS=sentinel: the sale with the lock behind Redis Sentinel, its
# primary SIGKILLed mid-sale (demo/sentinel.sh).
DEMO_REDIS ?=

demo:
	@tools/deps.sh
	@$(MAKE) --no-print-directory -s all
	@if [ "$(DEMO_REDIS)" = sentinel ]; then demo/sentinel.sh $(DEMO_ARGS); \
	 elif [ -n "$(DEMO_REDIS)" ]; then echo "demo: DEMO_REDIS=$(DEMO_REDIS): only sentinel" >&2; exit 2; \
	 else demo/run.sh $(DEMO_ARGS); fi
