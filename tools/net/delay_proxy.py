#!/usr/bin/env python3
"""A TCP proxy that delays every byte by a fixed time in each direction,
keeping order: a stand-in for `tc netem delay` on kernels built without
netem (sch_netem). Used by tests/e2e/cluster_faults.sh; test traffic only.

usage: delay_proxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT DELAY_MS
"""
import asyncio
import sys


async def pump(reader, writer, delay):
    """Copy reader to writer, each chunk leaving `delay` s after it came."""
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    async def receive():
        while True:
            data = await reader.read(1 << 16)
            await queue.put((loop.time() + delay, data))
            if not data:
                return

    async def send():
        while True:
            due, data = await queue.get()
            wait = due - loop.time()
            if wait > 0:
                await asyncio.sleep(wait)
            if not data:
                writer.close()
                return
            writer.write(data)
            await writer.drain()

    try:
        await asyncio.gather(receive(), send())
    except (ConnectionError, OSError):
        writer.close()


async def main():
    host, port, thost, tport, delay_ms = sys.argv[1:6]
    delay = float(delay_ms) / 1000.0

    async def handle(reader, writer):
        try:
            treader, twriter = await asyncio.open_connection(thost, int(tport))
        except OSError:
            writer.close()
            return
        await asyncio.gather(pump(reader, twriter, delay), pump(treader, writer, delay),
                             return_exceptions=True)

    server = await asyncio.start_server(handle, host, int(port))
    print(f"delay_proxy: {host}:{port} -> {thost}:{tport}, {delay_ms} ms each way", flush=True)
    async with server:
        await server.serve_forever()


if __name__ == "__main__":
    asyncio.run(main())
