"""Is the record intact? The compliance audit, the anchors of the ledger's head kept outside the ledger, and
recovery after a crash (completing or forgetting a publication the ledger intended)."""
