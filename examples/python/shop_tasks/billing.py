"""The shop's invoices."""

from shop_tasks import tasks


@tasks.task("SHOP_INVOICE")
def invoice(order: int) -> dict[str, object]:
    """Make the invoice of ``order`` (here: its number)."""
    return {"invoice": f"INV-{order:05d}"}
