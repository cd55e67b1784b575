# The demo: build/stock, an ordinary pthread program that oversells across
# machines, and `make demo`, which runs it on simulated machines without and
# then with the shim, then with the shim in each mode (default, fair, cache)
# for a table of sales per second (demo/run.sh; options via
# DEMO_ARGS="-m 3 -t 8 -n 2000", DEMO_ARGS=-q skips the table).

all: $(B)/stock

# A plain program: no shim headers or objects, dynamically linked (so the
# shim can be preloaded) and with stock_lock in its symbol table.
$(B)/stock: demo/stock.c
	@mkdir -p $(B)
	$(CC) -std=gnu11 $(DM_WARN) -pthread $(CFLAGS) $(shell pkg-config --cflags hiredis) \
	    $< -o $@ $(shell pkg-config --libs hiredis)

demo:
	@tools/deps.sh
	@$(MAKE) --no-print-directory -s all
	@demo/run.sh $(DEMO_ARGS)
