"""The shop's mail."""

from shop_tasks import tasks


@tasks.task("SHOP_RECEIPT", max_attempts=5)
def receipt(order: int, to: str) -> dict[str, object]:
    """Send the receipt of ``order`` (here: say what would be sent)."""
    return {"receipt": order, "to": to}
